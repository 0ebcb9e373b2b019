"""The audit stages after generation: label -> identities -> statistics -> report.

Each stage reads the outputs of the one before it from the run directory and writes its own
beside them; ``harness.audit.stages`` chains them and skips a stage whose outputs are current.
"""
