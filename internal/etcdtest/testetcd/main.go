// Command testetcd runs one member of an embedded etcd cluster
// (go.etcd.io/etcd/server/v3/embed) for pbfs's tests, which start real
// coordinators in processes of their own so that they can kill them.
//
//	testetcd NAME DIR CLIENT_URL PEER_URL INITIAL_CLUSTER
package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: testetcd NAME DIR CLIENT_URL PEER_URL INITIAL_CLUSTER")
		os.Exit(2)
	}
	cu, err1 := url.Parse(os.Args[3])
	pu, err2 := url.Parse(os.Args[4])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "bad URL")
		os.Exit(2)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = os.Args[1], os.Args[2]
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = os.Args[5]
	cfg.InitialClusterToken = "pbfs-test"
	cfg.LogLevel = "error"
	if _, err := os.Stat(cfg.Dir + "/member"); err == nil {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		os.Exit(1)
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("ready")
	case <-time.After(60 * time.Second):
		fmt.Fprintln(os.Stderr, "etcd did not become ready")
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
	}
	e.Close()
}
