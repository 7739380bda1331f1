"""Third-party reference code, vendored unchanged with its license and attribution."""
