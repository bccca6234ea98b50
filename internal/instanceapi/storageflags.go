package instanceapi

import "github.com/spf13/pflag"

// StorageFlags select a backup series' storage for `daytwo backup run`,
// `backup restore`, `backup check` and `instance run` (with the prefix
// "restore-"): the operator renders them with Args and the daytwo binary
// parses them with Bind, so both sides read one definition. Credentials
// and keys travel in the environment, never here.
type StorageFlags struct {
	// Endpoint, Bucket and Region select S3 storage; Insecure talks plain
	// HTTP and CAFile names a private CA's PEM file.
	Endpoint, Bucket, Region string
	Insecure                 bool
	CAFile                   string
	// Path is a directory on a mounted volume, instead of S3.
	Path string
	// Prefix is the series' key prefix.
	Prefix string
	// SeriesUID, SeriesName (namespace/name) and Database identify the
	// series (backup.Series).
	SeriesUID, SeriesName, Database string
	// KeyRequired trusts nothing stored unless the series key is set.
	KeyRequired bool
	S3Access
}

// S3Access is how S3 is reached beyond its address: the credentials when
// they are not static keys, and the encryption the store applies.
type S3Access struct {
	// RoleARN, with WebIdentityTokenFile (a projected ServiceAccount
	// token), asks STSEndpoint for temporary credentials.
	RoleARN              string `json:"roleARN,omitempty"`
	WebIdentityTokenFile string `json:"webIdentityTokenFile,omitempty"`
	STSEndpoint          string `json:"stsEndpoint,omitempty"`
	// SSE is AES256 (SSE-S3) or aws:kms (SSE-KMS, with SSEKMSKeyID).
	SSE         string `json:"sse,omitempty"`
	SSEKMSKeyID string `json:"sseKMSKeyID,omitempty"`
}

// The flag names of StorageFlags, after their prefix.
const (
	FlagS3Endpoint        = "s3-endpoint"
	FlagS3Bucket          = "s3-bucket"
	FlagS3Region          = "s3-region"
	FlagS3Insecure        = "s3-insecure"
	FlagS3CAFile          = "s3-ca-file"
	FlagStoragePath       = "path"
	FlagStoragePrefix     = "prefix"
	FlagSeriesUID         = "series-uid"
	FlagSeriesName        = "series-name"
	FlagSeriesDatabase    = "database-name"
	FlagSeriesKeyRequired = "series-key-required"
	FlagS3RoleARN         = "s3-role-arn"
	FlagS3TokenFile       = "s3-web-identity-token-file"
	FlagS3STSEndpoint     = "s3-sts-endpoint"
	FlagS3SSE             = "s3-sse"
	FlagS3SSEKMSKeyID     = "s3-sse-kms-key-id"
)

// Args renders s as flags named with prefix (ArgsOf); unset values are
// left out.
func (s StorageFlags) Args(prefix string) []string {
	return ArgsOf(s, func(s *StorageFlags, f *pflag.FlagSet) { s.Bind(f, prefix) })
}

// Bind defines s's flags, named with prefix, on f.
func (s *StorageFlags) Bind(f *pflag.FlagSet, prefix string) {
	f.StringVar(&s.Endpoint, prefix+FlagS3Endpoint, "", "S3 endpoint (host:port, or an http:// or https:// URL).")
	f.StringVar(&s.Bucket, prefix+FlagS3Bucket, "", "S3 bucket.")
	f.StringVar(&s.Region, prefix+FlagS3Region, "", "S3 region.")
	f.BoolVar(&s.Insecure, prefix+FlagS3Insecure, false, "Talk plain HTTP to the S3 endpoint.")
	f.StringVar(&s.CAFile, prefix+FlagS3CAFile, "", "PEM certificates of a private CA the S3 endpoint's certificate chains to, trusted besides the public ones.")
	f.StringVar(&s.Path, prefix+FlagStoragePath, "", "Directory on a mounted volume, instead of S3.")
	f.StringVar(&s.Prefix, prefix+FlagStoragePrefix, "", "Key prefix (directory) of this backup series.")
	f.StringVar(&s.SeriesUID, prefix+FlagSeriesUID, "", "UID of the DatabaseBackup whose series this is; other series at the same location are never touched.")
	f.StringVar(&s.SeriesName, prefix+FlagSeriesName, "", "namespace/name of that DatabaseBackup, recorded in manifests.")
	f.StringVar(&s.Database, prefix+FlagSeriesDatabase, "", "Name of the Database the series backs up.")
	f.BoolVar(&s.KeyRequired, prefix+FlagSeriesKeyRequired, false, "Trust nothing stored unless the series key is set in the environment (set but empty turns authentication off).")
	f.StringVar(&s.RoleARN, prefix+FlagS3RoleARN, "", "Role assumed with the web identity token (STS AssumeRoleWithWebIdentity).")
	f.StringVar(&s.WebIdentityTokenFile, prefix+FlagS3TokenFile, "", "File of the web identity token (a projected ServiceAccount token), read again at each renewal.")
	f.StringVar(&s.STSEndpoint, prefix+FlagS3STSEndpoint, "", "STS URL for the web identity (default: AWS's for amazonaws.com, else the S3 endpoint).")
	f.StringVar(&s.SSE, prefix+FlagS3SSE, "", "Server-side encryption of written objects: AES256 or aws:kms.")
	f.StringVar(&s.SSEKMSKeyID, prefix+FlagS3SSEKMSKeyID, "", "KMS key of aws:kms server-side encryption.")
}
