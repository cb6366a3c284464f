// Package config holds the daemon's one config struct: defaults, a YAML file,
// GPUCACHE_* environment variables and flags, in rising precedence, and
// Validate, whose errors name the field and what to do about it.
package config
