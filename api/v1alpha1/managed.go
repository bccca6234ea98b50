package v1alpha1

import (
	"slices"
	"strings"
)

// ManagedParameters are the postgresql.conf settings daytwo manages, which
// spec.parameters must not set: where the server listens and its files,
// TLS, WAL archiving and recovery, replication, logging's destination, and
// what would let a setting load code. The CRD's rule on Parameters is
// generated from this list (hack/gen-managed-rule, run by `make
// generate`), and the operator checks it too, for a CRD not yet upgraded.
var ManagedParameters = []string{
	"listen_addresses", "port", "unix_socket_directories", "unix_socket_group",
	"unix_socket_permissions", "data_directory", "config_file", "hba_file", "ident_file",
	"external_pid_file", "cluster_name", "include", "include_dir", "include_if_exists",
	"archive_mode", "archive_command", "archive_library", "archive_cleanup_command",
	"restore_command", "recovery_end_command", "recovery_target", "recovery_target_action",
	"recovery_target_inclusive", "recovery_target_lsn", "recovery_target_name",
	"recovery_target_time", "recovery_target_timeline", "recovery_target_xid", "primary_conninfo",
	"primary_slot_name", "promote_trigger_file", "ssl", "ssl_ca_file", "ssl_cert_file", "ssl_crl_dir",
	"ssl_crl_file", "ssl_dh_params_file", "ssl_key_file", "ssl_passphrase_command",
	"krb_server_keyfile", "logging_collector", "log_directory", "log_filename", "log_destination",
	"syslog_facility", "syslog_ident", "full_page_writes", "wal_level", "wal_log_hints",
	"hot_standby", "synchronous_standby_names", "allow_system_table_mods", "dynamic_library_path",
	"local_preload_libraries", "session_preload_libraries", "jit_provider",
}

// IsManagedParameter says whether daytwo manages the setting name.
func IsManagedParameter(name string) bool { return slices.Contains(ManagedParameters, name) }

// ManagedParametersMarker is the kubebuilder marker of the CRD's rule on
// Parameters that refuses ManagedParameters, naming the first one set.
func ManagedParametersMarker() string {
	list := "['" + strings.Join(ManagedParameters, "', '") + "']"
	return `// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ` + list + `))",` +
		`messageExpression="'parameters must not set a setting daytwo manages: ' + self.filter(k, k in ` + list + `)[0]"`
}
