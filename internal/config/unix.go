package config

import (
	"path/filepath"
	"strconv"
)

// The Unix-domain listener and registered regions (ADR 0026;
// docs/PROTOCOL.md, "Registered regions (version 5)").
//
// unix_listen turns on a second data listener, a Unix-domain stream socket
// at a path, that speaks the same native protocol as listen. Engines on the
// same host use it, and on it they may register shared memory (a memfd or
// a /dev/shm file) so that GET and PUT copy once between the server's slab
// and the engine's buffer. Authentication is as on listen (HELLO with a
// secret); tenants[].unix_uids also map the connecting process's user id,
// read from the kernel, to a tenant. Open mode is allowed on it, as on
// loopback: only processes on this host can connect.

// unixFields lists the Unix listener's and the regions' flags.
func (c *Config) unixFields() []field {
	return []field{
		{"unix_listen", `Unix-domain socket path for co-located engines, e.g. /run/gpucache/gpucached.sock ("off" disables)`, (*strVal)(&c.UnixListen)},
		{"unix_listen_mode", "file mode of the Unix socket, octal", (*strVal)(&c.UnixListenMode)},
		{"region_bytes", "registered shared-memory bytes mapped at once, all connections together", &c.RegionBytes},
		{"tenant_region_bytes", "registered shared-memory bytes one tenant's connections may map at once", &c.TenantRegionBytes},
	}
}

// UnixEnabled reports whether unix_listen is set.
func (c Config) UnixEnabled() bool { return c.UnixListen != "" && c.UnixListen != "off" }

// UnixMode is unix_listen_mode parsed (validated by Validate).
func (c Config) UnixMode() uint32 {
	m, _ := strconv.ParseUint(c.UnixListenMode, 8, 32)
	return uint32(m)
}

// validateUnix checks the Unix listener and the region bounds.
func (c Config) validateUnix() error {
	if c.UnixEnabled() {
		if !filepath.IsAbs(c.UnixListen) {
			return invalidf("unix_listen %q must be an absolute path", c.UnixListen)
		}
		if len(c.UnixListen) > 107 {
			return invalidf("unix_listen %q is longer than a Unix socket path may be (107 bytes)", c.UnixListen)
		}
	}
	if m, err := strconv.ParseUint(c.UnixListenMode, 8, 32); err != nil || m > 0o777 {
		return invalidf("unix_listen_mode %q is not an octal file mode (e.g. 0660)", c.UnixListenMode)
	}
	if c.RegionBytes < 0 || c.TenantRegionBytes < 0 {
		return invalidf("region_bytes and tenant_region_bytes must not be negative")
	}
	if c.TenantRegionBytes > c.RegionBytes {
		return invalidf("tenant_region_bytes %s exceeds region_bytes %s", c.TenantRegionBytes, c.RegionBytes)
	}
	for _, t := range c.Tenants {
		if len(t.UnixUIDs) > 0 && !c.UnixEnabled() {
			return invalidf("tenant %q has unix_uids but unix_listen is off", t.Name)
		}
	}
	return nil
}
