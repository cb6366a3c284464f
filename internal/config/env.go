package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// OtherEnv lists the GPUCACHE_* environment variables that are not
// gpucached settings but that gpucache's other programs read: the config
// file's name, the gpucache CLI's defaults, the Python client's and the
// test scripts'. A shell that sets them for those programs starts gpucached
// without a warning.
var OtherEnv = []string{
	"GPUCACHE_CONFIG", // gpucached: the YAML file (--config)
	// the gpucache CLI (its --help names each)
	"GPUCACHE_ADDR", "GPUCACHE_CLUSTER", "GPUCACHE_TENANT", "GPUCACHE_SECRET_FILE",
	"GPUCACHE_TLS_CA", "GPUCACHE_CLIENT_CERT", "GPUCACHE_CLIENT_KEY", "GPUCACHE_ADMIN", "GPUCACHE_ADMIN_TOKEN_FILE",
	// the Python package's adapters
	"GPUCACHE_ADDRS",
	// scripts/test and the tests it runs
	"GPUCACHE_RACE", "GPUCACHE_VERSITYGW", "GPUCACHE_CHROMIUM", "GPUCACHE_BIN", "GPUCACHE_GPUCACHED",
	"GPUCACHE_HELM", "GPUCACHE_RESP_ADDR",
	// scripts/local-cluster (and the tests that run it)
	"GPUCACHE_ETCD",
}

// CheckEnv checks the GPUCACHE_* variables of environ (os.Environ's
// form) against cfg. The rule (README, "Configure"): a variable is fine
// when it is a setting (GPUCACHE_ + its YAML key in upper case), one of
// OtherEnv, or the env of a secret that cfg names (tenants' secrets,
// seal_keys, cold_encryption_keys). A variable a short edit away from a
// setting's name is a typo: CheckEnv returns an error naming the setting
// meant, and the daemon refuses to start. Any other GPUCACHE_* variable is
// returned as a warning to log: gpucached ignores it.
func CheckEnv(cfg Config, environ []string) (warnings []string, err error) {
	settings := []string{"GPUCACHE_CONFIG"}
	for _, f := range cfg.fields() {
		settings = append(settings, EnvName(f.key))
	}
	known := slices.Concat(settings, OtherEnv, cfg.SecretEnvs())
	var typos []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "GPUCACHE_") || slices.Contains(known, name) {
			continue
		}
		if s := Suggest(name, settings); s != "" {
			typos = append(typos, fmt.Sprintf("environment variable %s is not a gpucached setting; did you mean %s?", name, s))
			continue
		}
		warnings = append(warnings, fmt.Sprintf("environment variable %s is not a gpucached setting and no secret in the config names it; ignored", name))
	}
	if len(typos) > 0 {
		return warnings, fmt.Errorf("%w: %s (fix or unset it; docs/CONFIG.md lists every setting)", ErrInvalid, strings.Join(typos, "; "))
	}
	return warnings, nil
}

// SecretEnvs returns the environment variables that the config's secrets
// are read from (SecretConfig.Env anywhere in cfg).
func (c Config) SecretEnvs() []string {
	var out []string
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(it.Value())
			}
		case reflect.Struct:
			if s, ok := v.Interface().(SecretConfig); ok {
				if s.Env != "" {
					out = append(out, s.Env)
				}
				return
			}
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		}
	}
	walk(reflect.ValueOf(c))
	return out
}
