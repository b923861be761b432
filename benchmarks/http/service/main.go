// Command service is the benchmark's stateful upstream: internal/testservice
// (POST /kv/KEY stores the body with write, fsync, rename; every answer
// says "Connection: close", as the WordPress container in the XDN report
// did) listening on -listen and keeping its state in -dir.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/internal/testservice"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8081", "address to serve on")
	dir := flag.String("dir", "", "state directory")
	keepAlive := flag.Bool("keep-alive", false, "do not answer Connection: close")
	flag.Parse()
	if *dir == "" {
		log.Fatal("service: -dir is required")
	}
	srv := &http.Server{Addr: *listen, Handler: &testservice.Service{Dir: *dir, KeepAlive: *keepAlive}, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
