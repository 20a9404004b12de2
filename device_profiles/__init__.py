"""Built-in device profiles (TOML data files) and their JSON schema."""
