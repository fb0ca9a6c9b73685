"""The CLI, the LSP server and the job machinery around the search."""
