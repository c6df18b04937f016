"""The published DSpark draft checkpoint, read and validated with numpy (no torch), for every stage that meets it.

- `config`: `config.json` (flat or under `dflash_config`), with the fields loaders may infer.
- `draft`: the weights, `d2t` and `local-to-target.json`, and whether a draft fits a target.
"""
