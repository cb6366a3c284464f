package config

import "time"

// validateAudit checks the audit file's size bound and the throttle of
// auth_failure events.
func (c Config) validateAudit() error {
	if c.AuditMaxBytes < 1<<20 || c.AuditMaxBytes > 1<<40 {
		return invalidf("audit_max_bytes %s not in 1MiB..1TiB", c.AuditMaxBytes)
	}
	if c.AuditMaxFiles < 0 || c.AuditMaxFiles > 1000 {
		return invalidf("audit_max_files %d not in 0..1000 (rotated files kept; 0 keeps none)", c.AuditMaxFiles)
	}
	if c.AuditAuthFailuresPerSource < 1 || c.AuditAuthFailuresPerSource > 1_000_000 {
		return invalidf("audit_auth_failures_per_source %d not in 1..1000000", c.AuditAuthFailuresPerSource)
	}
	if c.AuditAuthFailureInterval < time.Second || c.AuditAuthFailureInterval > time.Hour {
		return invalidf("audit_auth_failure_interval %s not in 1s..1h", c.AuditAuthFailureInterval)
	}
	if c.AuditAuthFailureSources < 1 || c.AuditAuthFailureSources > 1<<16 {
		return invalidf("audit_auth_failure_sources %d not in 1..65536", c.AuditAuthFailureSources)
	}
	return nil
}
