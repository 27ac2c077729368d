"""The `memloop` CLI (`cli` builds the Typer app; one module per area registers its commands).
Thin: parses arguments and calls the floors below, which it may all import."""
