package config

// FlagKeys returns the YAML keys that also have a GPUCACHE_* environment
// variable and a command-line flag, in the order --help lists them. Every
// other key of Config (tenants, seal_keys, ...) is YAML only.
func FlagKeys() []string {
	var c Config
	fs := c.fields()
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return keys
}
