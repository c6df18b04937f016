"""Measuring the pair: acceptance statistics, comparisons, the benchmark, and what each mechanism changes. The pages
it measures on come from `utils.pages`.

Pages: `page_choice` (a page chosen by what happens on it).
Statistics: `character_error_rate`, `glyph_confusion`, `acceptance`, `position_stops`, `confidence_cut`,
`suite_tokens_per_step`.
Comparisons: `compare` (precision studies), `near_tie` and `rounded_weights` (a token a reduced precision flips),
`ablation` (Markov walk and threshold), `pruned_vocabulary`, `compression_report` and `compressed_weights`.
Speed: `benchmark` (`python -m utils.bench`), `speedup_terms`, `speed_notes`, `seed_figures`, `plots`.
"""
