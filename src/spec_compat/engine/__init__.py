"""The patch engine: declarations (`patch`), their gates (`versions`, `probes`, the stock code
read by `stock_source`), the `registry` that selects, decides, applies and reverts them
(`listing`, `stacks`, `replacements`, `import_hook`, `requirements`), the generic call check
(`drift`), the selection handed to child processes (`selection`) and the strings every side
shares (`names`).

It imports nothing of spec_compat outside this package: patches, model checks and tools
are built on it, never the other way round.
"""
