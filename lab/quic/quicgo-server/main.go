// ccscope-quicgo-server: the lab's HTTP/3 server on quic-go, writing a qlog per connection.
//
// Same routes and flags as the quiche and aioquic lab servers (/obj/<bytes>, /large, /health,
// /; --cc, --qlog-dir, --runs-dir). quic-go's congestion control is its Reno (the library
// hard-wires the Reno mode of its cubic sender), so --cc accepts only reno. A request carrying
// x-ccscope-run: ID leaves <runs-dir>/<ID>.json naming the connection's qlog
// (<qlog-dir>/<odcid>_server.sqlog); quic-go flushes it when the connection ends.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

const maxObject = 1 << 30

var (
	runIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	objRe   = regexp.MustCompile(`^/obj/(\d{1,10})$`)
	pattern = func() []byte {
		b := make([]byte, 16384)
		for i := range b {
			b[i] = byte('a' + i%26)
		}
		return b
	}()
)

type peerKey struct{}

// qlogs maps a client address (as the handler sees it) to its connection's qlog file.
type qlogs struct {
	mu sync.Mutex
	m  map[string]string
}

func (q *qlogs) put(addr, path string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.m[addr] = path
}

func (q *qlogs) get(addr string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.m[addr]
}

func main() {
	listen := flag.String("listen", "0.0.0.0:443", "ADDR:PORT")
	cert := flag.String("cert", "", "certificate chain (PEM)")
	key := flag.String("key", "", "private key (PEM)")
	cc := flag.String("cc", "reno", "congestion control (quic-go has reno only)")
	label := flag.String("label", "", "class label (default quicgo:<cc>)")
	qlogDir := flag.String("qlog-dir", "", "directory for qlog files")
	runsDir := flag.String("runs-dir", "", "directory for run records")
	large := flag.Int64("large", 1_000_000, "size of /large")
	flag.Parse()
	if *cc != "reno" {
		log.Fatalf("quic-go runs Reno only, not %q", *cc)
	}
	if *label == "" {
		*label = "quicgo:" + *cc
	}
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		log.Fatalf("cannot load certificate: %v", err)
	}
	files := &qlogs{m: map[string]string{}}
	qconf := &quic.Config{MaxIdleTimeout: 30 * time.Second, InitialPacketSize: 1200, DisablePathMTUDiscovery: true}
	if *qlogDir != "" {
		if err := os.Setenv("QLOGDIR", *qlogDir); err != nil {
			log.Fatal(err)
		}
		qconf.Tracer = func(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace {
			if peer, ok := ctx.Value(peerKey{}).(string); ok {
				files.put(peer, filepath.Join(*qlogDir, fmt.Sprintf("%s_server.sqlog", connID)))
			}
			return qlog.DefaultConnectionTracer(ctx, isClient, connID)
		}
	}
	udp, err := net.ListenPacket("udp", *listen)
	if err != nil {
		log.Fatalf("cannot listen on %s: %v", *listen, err)
	}
	tr := &quic.Transport{
		Conn: udp,
		ConnContext: func(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
			return context.WithValue(ctx, peerKey{}, ci.RemoteAddr.String()), nil
		},
	}
	tlsConf := http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{pair}})
	ln, err := tr.ListenEarly(tlsConf, qconf)
	if err != nil {
		log.Fatalf("cannot listen: %v", err)
	}
	started := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("x-ccscope-run"); id != "" && runIDRe.MatchString(id) && *runsDir != "" {
			record(*runsDir, id, *cc, *label, files.get(r.RemoteAddr), r.RemoteAddr, started)
		}
		w.Header().Set("server", "ccscope-quicgo-server")
		if m := objRe.FindStringSubmatch(r.URL.Path); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 64)
			if err == nil && n <= maxObject {
				stream(w, n)
				return
			}
		}
		switch r.URL.Path {
		case "/large":
			stream(w, *large)
		case "/health":
			b, _ := json.Marshal(map[string]any{"stack": "quicgo", "cca": *cc, "label": *label, "pid": os.Getpid()})
			w.Header().Set("content-type", "application/json")
			_, _ = w.Write(append(b, '\n'))
		case "/":
			_, _ = fmt.Fprintf(w, "<html><body><h1>%s</h1><a href=\"/large\">large</a></body></html>\n", *label)
		default:
			http.NotFound(w, r)
		}
	})
	srv := &http3.Server{Handler: mux, QUICConfig: qconf, TLSConfig: tlsConf}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = srv.Close()
		_ = ln.Close()
		os.Exit(0)
	}()
	log.Printf("listening on %s (%s, cc %s)", *listen, *label, *cc)
	if err := srv.ServeListener(ln); err != nil {
		log.Printf("serve: %v", err)
	}
}

func stream(w http.ResponseWriter, n int64) {
	w.Header().Set("content-length", strconv.FormatInt(n, 10))
	for n > 0 {
		k := int64(len(pattern))
		if n < k {
			k = n
		}
		if _, err := w.Write(pattern[:k]); err != nil {
			return
		}
		n -= k
	}
}

func record(dir, id, cc, label, qlogPath, peer string, started time.Time) {
	doc := map[string]any{"run_id": id, "stack": "quicgo", "cca": cc, "label": label, "peer": peer,
		"started": float64(started.UnixNano()) / 1e9}
	if qlogPath != "" {
		doc["qlog"] = qlogPath
	}
	b, _ := json.Marshal(doc)
	tmp := filepath.Join(dir, "."+id+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		_ = os.Rename(tmp, filepath.Join(dir, id+".json"))
	}
}
