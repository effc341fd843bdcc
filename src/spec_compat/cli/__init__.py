"""The commands on top of everything: `doctor` (touch points, patch states, a model's
route, exit codes) and `run` (a script or module under the patches, or its replicas on
Ray).  `python -m spec_compat` (`spec_compat.__main__`) dispatches to them.
"""
