"""Cross-cutting pieces every process shares: settings, the product clock, logging."""
