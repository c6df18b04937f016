"""Scripts that print figures at real size (random weights, the published sizes); run as modules:
`python -m benchmarks.NAME --help`. They are measurements, not tests."""
