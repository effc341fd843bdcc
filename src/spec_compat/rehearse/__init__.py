"""`spec-compat rehearse`: a shrunk copy of a model run through the stock extractor under
the patches and compared with its oracle before anyone loads the real one.  `command`
drives it (the CLI), `rehearsal` runs and compares the child processes, `child` is their
entry point, `miniature` shrinks a config, `seeded_weights` loads weights seeded by name
where there is no checkpoint.

It imports the engine, the model checks, the patches and `spec_compat.api`; nothing below
it imports it.
"""
