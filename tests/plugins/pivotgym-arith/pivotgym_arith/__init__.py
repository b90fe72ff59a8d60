"""A tiny third-party domain: follow a chain of arithmetic instructions, one per turn."""
