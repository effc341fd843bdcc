"""The datasets a data script writes: `spec-compat check-data DIR` (`check`), the set as a
whole (`dataset`: indices, JSON files, lengths), one `data_N.pt` (`sample`), and the repair
of a killed run (`repair`: quarantine beside DIR).

It imports nothing of spec_compat outside this package.
"""
