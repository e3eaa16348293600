"""One module per subcommand: parse options, call the core, pick a format. Thin."""
