"""CLI subcommands that live in the engine: track, eval, sample."""
