"""Measuring the pair: pages, acceptance statistics, comparisons, the benchmark, and what each mechanism changes.

Pages: `pages`, `reading_pages`, `written_pages`, `typewriter` (drawn offline), `sample_archive`, `omnidocbench`
(downloaded only when online), `page_choice` (a page chosen by what happens on it).
Statistics: `character_error_rate`, `acceptance`, `position_stops`, `confidence_cut`, `suite_tokens_per_step`.
Comparisons: `compare` (precision studies), `near_tie` and `rounded_weights` (a token a reduced precision flips),
`ablation` (Markov walk and threshold), `pruned_vocabulary`, `compression_report` and `compressed_weights`.
Speed: `benchmark` (`python -m utils.bench`), `speedup_terms`, `speed_notes`, `seed_figures`, `plots`.
"""
