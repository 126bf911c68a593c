// An S3 stand-in for benchmarks that moto cannot keep up with: gofakes3's in-memory backend
// (conditional PUT, ranged GET, ListObjectsV2, multi-object delete) behind a request log in
// moto's format, so bench/s3_requests.py counts its requests the same way. Objects live in
// memory only: for benchmarks, never for data anyone keeps.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// requestLog writes one line per request, as werkzeug (moto's server) does:
// 127.0.0.1 - - [date] "PUT /bucket/key HTTP/1.1" 200 -
type requestLog struct {
	mu  sync.Mutex
	out *bufio.Writer
}

// The log is flushed after every line: the benchmark reads it between phases.
func (l *requestLog) line(r *http.Request, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	stamp := time.Now().Format("02/Jan/2006 15:04:05")
	fmt.Fprintf(l.out, "127.0.0.1 - - [%s] \"%s %s %s\" %d -\n", stamp, r.Method, r.RequestURI, r.Proto, status)
	l.out.Flush()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9000", "address to listen on")
	logPath := flag.String("log", "", "request log (moto's format); standard output if unset")
	bucket := flag.String("bucket", "", "a bucket to create at start")
	flag.Parse()

	out := os.Stdout
	if *logPath != "" {
		file, err := os.Create(*logPath)
		if err != nil {
			log.Fatalf("cannot create the request log %s: %v", *logPath, err)
		}
		out = file
	}
	requests := &requestLog{out: bufio.NewWriter(out)}
	backend := s3mem.New()
	if *bucket != "" {
		if err := backend.CreateBucket(*bucket); err != nil {
			log.Fatalf("cannot create bucket %s: %v", *bucket, err)
		}
	}
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	s3 := faker.Server()
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		recorded := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		s3.ServeHTTP(recorded, r)
		requests.line(r, recorded.status)
	})
	log.Printf("s3fast listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, handler))
}
