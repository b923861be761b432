package wire

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ErrTokenExposed refuses a token file other users may read: anyone who
// holds the token can act as a primary to the backups (docs/FAILOVER.md).
var ErrTokenExposed = errors.New("the token file is readable by other users")

// ErrNoToken is returned when no replication token is configured.
var ErrNoToken = errors.New("no replication token: set --token, --token-file or PBFS_TOKEN")

// LoadToken picks the shared token: the flag value, else the file, else
// the PBFS_TOKEN environment variable (a file or the environment keeps it
// out of ps).
func LoadToken(flag, file string) (string, error) {
	t, err := loadToken(flag, file)
	if err == nil && len(t) > maxTokenFrame {
		return "", fmt.Errorf("the replication token is %d bytes long; at most %d are sent", len(t), maxTokenFrame)
	}
	return t, err
}

func loadToken(flag, file string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read token file: %w", err)
		}
		if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%w: %s has mode %04o: chmod 600 %s (as ssh wants of a private key)", ErrTokenExposed, file, fi.Mode().Perm(), file)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("token file %s is empty: %w", file, ErrNoToken)
	}
	if t := os.Getenv("PBFS_TOKEN"); t != "" {
		return t, nil
	}
	return "", ErrNoToken
}

// tokenCreds sends the token with every call.
type tokenCreds struct {
	token  string
	secure bool
}

func (c tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + c.token}, nil
}

func (c tokenCreds) RequireTransportSecurity() bool { return c.secure }

// MaxHeaderList bounds a call's headers (HTTP/2's header list), read
// before the token is checked: the token (at most maxTokenFrame) and
// gRPC's own few.
const MaxHeaderList = 16 << 10

// CheckToken checks a call's token in constant time; a call without it
// is refused with Unauthenticated, and refused told why.
func CheckToken(md metadata.MD, token string, refused func(reason string)) error {
	got := md.Get("authorization")
	if len(got) == 1 && subtle.ConstantTimeCompare([]byte(got[0]), []byte("Bearer "+token)) == 1 {
		return nil
	}
	reason := "wrong token"
	if len(got) == 0 {
		reason = "no token"
	}
	refused(reason)
	return status.Error(codes.Unauthenticated, "pbfs backup: "+reason)
}
