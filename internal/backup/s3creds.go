package backup

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// s3Credentials picks how S3 is signed: static keys when given; a web
// identity token exchanged at STS when a role is named; otherwise the
// environment's chain, in the AWS SDKs' order (keys in the environment,
// then a web identity token file, container credentials and the instance
// metadata service, which minio-go's IAM provider tries in turn).
func s3Credentials(cfg S3Config, endpoint string, secure bool, t http.RoundTripper) (*credentials.Credentials, error) {
	switch {
	case cfg.AccessKeyID != "":
		return credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, ""), nil
	case cfg.RoleARN != "" || cfg.WebIdentityTokenFile != "":
		if cfg.RoleARN == "" || cfg.WebIdentityTokenFile == "" {
			return nil, errors.New("a web identity needs both a role ARN and a token file")
		}
		return credentials.NewKubernetesIdentity(stsEndpoint(cfg, endpoint, secure),
			credentials.WithWebIdentityTokenFile(cfg.WebIdentityTokenFile),
			func(i *credentials.STSWebIdentity) {
				i.RoleARN = cfg.RoleARN
				i.Client = &http.Client{Transport: t}
			})
	default:
		return credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.IAM{Client: &http.Client{Transport: t}},
		}), nil
	}
}

// stsEndpoint is the STS URL asked for, or AWS's regional STS for an
// amazonaws.com endpoint, or else the S3 endpoint itself (MinIO and Ceph
// serve STS there).
func stsEndpoint(cfg S3Config, endpoint string, secure bool) string {
	if cfg.STSEndpoint != "" {
		return strings.TrimSuffix(cfg.STSEndpoint, "/")
	}
	host := strings.Split(endpoint, ":")[0]
	if strings.HasSuffix(host, ".amazonaws.com") {
		if cfg.Region == "" {
			return "https://sts.amazonaws.com"
		}
		return "https://sts." + cfg.Region + ".amazonaws.com"
	}
	if secure {
		return "https://" + endpoint
	}
	return "http://" + endpoint
}

// serverSideEncryption is the encryption header of every object written:
// none, SSE-S3 or SSE-KMS.
func serverSideEncryption(a instanceapi.S3Access) (encrypt.ServerSide, error) {
	switch a.SSE {
	case "":
		return nil, nil
	case "AES256":
		return encrypt.NewSSE(), nil
	case "aws:kms":
		sse, err := encrypt.NewSSEKMS(a.SSEKMSKeyID, nil)
		if err != nil {
			return nil, fmt.Errorf("invalid SSE-KMS settings: %w", err)
		}
		return sse, nil
	default:
		return nil, fmt.Errorf("unknown server-side encryption %q: want AES256 or aws:kms", a.SSE)
	}
}
