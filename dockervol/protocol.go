package dockervol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// The Docker volume plugin protocol (docs.docker.com/engine/extend/
// plugins_volume), which Podman speaks too: the engine POSTs a JSON
// request to /Plugin.Activate and /VolumeDriver.<Method> on the plugin's
// unix socket and reads a JSON answer whose Err, when set, is the error it
// shows its user. It is nine small endpoints, written here rather than
// taken from github.com/docker/go-plugins-helpers: that module is
// untagged, declares none of its dependencies (go-connections,
// go-systemd, go-winio), and puts the socket where it chooses.

// ContentType is the protocol's media type.
const ContentType = "application/vnd.docker.plugins.v1.2+json"

// request is every request's body (each method reads what it needs).
type request struct {
	Name string
	ID   string
	Opts Options
}

// volumeJSON is a volume in an answer.
type volumeJSON struct {
	Name       string
	Mountpoint string         `json:",omitempty"`
	CreatedAt  string         `json:",omitempty"`
	Status     map[string]any `json:",omitempty"`
}

func toJSON(i Info) volumeJSON {
	return volumeJSON{Name: i.Name, Mountpoint: i.Mountpoint, CreatedAt: i.CreatedAt.Format(time.RFC3339), Status: i.Status}
}

// Handler answers the protocol for d.
func Handler(d *Driver) http.Handler {
	mux := http.NewServeMux()
	handle := func(method string, fn func(request) (map[string]any, error)) {
		mux.HandleFunc("POST /"+method, func(w http.ResponseWriter, r *http.Request) {
			var req request
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if err == nil && len(body) > 0 {
				err = json.Unmarshal(body, &req)
			}
			var out map[string]any
			if err == nil {
				out, err = fn(req)
			} else {
				err = fmt.Errorf("%s: bad request: %w", method, err)
			}
			reply(w, d, method, req, out, err)
		})
	}
	handle("Plugin.Activate", func(request) (map[string]any, error) {
		return map[string]any{"Implements": []string{"VolumeDriver"}}, nil
	})
	handle("VolumeDriver.Capabilities", func(request) (map[string]any, error) {
		return map[string]any{"Capabilities": map[string]string{"Scope": "local"}}, nil
	})
	handle("VolumeDriver.Create", func(r request) (map[string]any, error) { return nil, d.Create(r.Name, r.Opts) })
	handle("VolumeDriver.Remove", func(r request) (map[string]any, error) { return nil, d.Remove(r.Name) })
	handle("VolumeDriver.Mount", func(r request) (map[string]any, error) {
		p, err := d.Mount(r.Name, r.ID)
		return map[string]any{"Mountpoint": p}, err
	})
	handle("VolumeDriver.Unmount", func(r request) (map[string]any, error) { return nil, d.Unmount(r.Name, r.ID) })
	handle("VolumeDriver.Path", func(r request) (map[string]any, error) {
		p, err := d.Path(r.Name)
		return map[string]any{"Mountpoint": p}, err
	})
	handle("VolumeDriver.Get", func(r request) (map[string]any, error) {
		i, err := d.Get(r.Name)
		return map[string]any{"Volume": toJSON(i)}, err
	})
	handle("VolumeDriver.List", func(request) (map[string]any, error) {
		vols := []volumeJSON{}
		for _, i := range d.List() {
			vols = append(vols, toJSON(i))
		}
		return map[string]any{"Volumes": vols}, nil
	})
	return mux
}

// reply writes an answer: out, or the error as Err (with status 500, as
// the engine expects of a failed call).
func reply(w http.ResponseWriter, d *Driver, method string, req request, out map[string]any, err error) {
	w.Header().Set("Content-Type", ContentType)
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, ErrNotFound) {
			level = slog.LevelDebug // the engine asks before it creates
		}
		d.log.Log(context.Background(), level, "request refused", "method", method, "volume", req.Name, "err", err)
		w.WriteHeader(http.StatusInternalServerError)
		json.NewEncoder(w).Encode(map[string]string{"Err": err.Error()})
		return
	}
	if out == nil {
		out = map[string]any{}
	}
	out["Err"] = ""
	d.log.Debug("request", "method", method, "volume", req.Name, "id", req.ID)
	json.NewEncoder(w).Encode(out)
}

// ErrSocketInUse refuses a socket another driver answers on.
var ErrSocketInUse = errors.New("another driver answers on the socket")

// Listen opens the driver's unix socket (its name, NAME.sock, is the
// driver's name to the engine), replacing a stale one a killed driver
// left.
func Listen(socket string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen on %s: %w: stop it first", socket, ErrSocketInUse)
	}
	os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	return ln, nil
}

// Serve answers the engine on ln until ctx ends, then removes the socket.
// Requests under way finish first: a Mount that started a volume's mount
// records it.
func Serve(ctx context.Context, ln net.Listener, d *Driver) error {
	srv := &http.Server{Handler: Handler(d), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	os.Remove(ln.Addr().String())
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return srv.Shutdown(sctx)
}
