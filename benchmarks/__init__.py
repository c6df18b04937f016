"""Scripts that print figures at real size (random weights, the published sizes); run as modules:
`python -m benchmarks.NAME --help`. They are measurements, not tests. `harness` and `stand_ins` are the two that
are not scripts: what the others share, and the stand-ins tests import."""
