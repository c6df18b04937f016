"""The pages the suite reads, trains on and measures with, generated here and nowhere else.

`samples` (the corpus and the sample pages' text), `typewriter` (the one page shape a tiny reader reads, drawn from a
shipped glyph atlas), `reading_pages` (generated pages of every kind, split into training and held-out streams),
`written_pages` (pages written by hand), `hard_pages` (look-alike glyphs and digit grids), `sample_archive` (a
folder of files to read as an archive) and `omnidocbench` (the seed's benchmark pages, downloaded only when
online). The tiny pair learns from them (`utils.tiny`) and `utils.evaluation` measures readings of them; neither
generates pages of its own.
"""
