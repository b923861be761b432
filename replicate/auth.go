package replicate

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ErrNoToken is returned when no replication token is configured.
var ErrNoToken = errors.New("no replication token: set --token, --token-file or PBFS_TOKEN")

// LoadToken picks the shared token: the flag value, else the file, else
// the PBFS_TOKEN environment variable (a file or the environment keeps it
// out of ps).
func LoadToken(flag, file string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read token file: %w", err)
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

// checkToken is a stream interceptor that refuses calls without the token.
func checkToken(token string, refused func(reason string)) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := authorized(ss.Context(), token, refused); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// checkTokenUnary is checkToken for unary calls.
func checkTokenUnary(token string, refused func(reason string)) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := authorized(ctx, token, refused); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// authorized checks the call's token in constant time.
func authorized(ctx context.Context, token string, refused func(reason string)) error {
	md, _ := metadata.FromIncomingContext(ctx)
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
