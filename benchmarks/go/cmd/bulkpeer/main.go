// Command bulkpeer indexes an NDJSON file of documents with opensearch-go's
// opensearchutil.BulkIndexer (v4.8.1), the peer searchwire's bulk indexer is measured against.
// It prints one JSON object: documents, failures, wall seconds, CPU seconds (user+system, from
// getrusage), documents per second and per CPU-second, and peak RSS.
//
//	bulkpeer -url http://127.0.0.1:9290 -file docs.ndjson -index bench
//
// Each document's id is its "id" field, found without a full JSON parse (the generator puts it
// first), which favours the peer: searchwire's side parses every document.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/opensearch-project/opensearch-go/v4"
	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"
	"github.com/opensearch-project/opensearch-go/v4/opensearchutil"
)

func cpuSeconds() (float64, int64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	secs := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return secs(ru.Utime) + secs(ru.Stime), ru.Maxrss
}

func main() {
	urls := flag.String("url", "http://127.0.0.1:9290", "comma-separated node URLs")
	file := flag.String("file", "", "NDJSON documents (one JSON object per line)")
	index := flag.String("index", "bench", "target index")
	action := flag.String("action", "create", "bulk action: index or create")
	workers := flag.Int("workers", 4, "BulkIndexer workers (requests in flight)")
	flushBytes := flag.Int("flush-bytes", 5_000_000, "flush threshold in bytes")
	flag.Parse()
	if *file == "" {
		fmt.Fprintln(os.Stderr, "bulkpeer: -file is required")
		os.Exit(2)
	}
	client, err := opensearchapi.NewClient(opensearchapi.Config{Client: opensearch.Config{
		Addresses:     strings.Split(*urls, ","),
		RetryOnStatus: []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests},
		RetryBackoff:  func(i int) time.Duration { return time.Duration(i) * 100 * time.Millisecond },
		MaxRetries:    5,
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bulkpeer:", err)
		os.Exit(2)
	}
	var failed atomic.Int64
	bi, err := opensearchutil.NewBulkIndexer(opensearchutil.BulkIndexerConfig{
		Client: client, Index: *index, NumWorkers: *workers, FlushBytes: *flushBytes,
		FlushInterval: time.Second,
		OnError:       func(context.Context, error) { failed.Add(1) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bulkpeer:", err)
		os.Exit(2)
	}
	f, err := os.Open(*file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bulkpeer:", err)
		os.Exit(2)
	}
	defer f.Close()
	start := time.Now()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	onFailure := func(_ context.Context, _ opensearchutil.BulkIndexerItem, _ opensearchapi.BulkRespItem, _ error) {
		failed.Add(1)
	}
	ctx := context.Background()
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		id := ""
		if i := bytes.Index(line, []byte(`"id":"`)); i >= 0 {
			rest := line[i+6:]
			if j := bytes.IndexByte(rest, '"'); j >= 0 {
				id = string(rest[:j])
			}
		}
		if err := bi.Add(ctx, opensearchutil.BulkIndexerItem{
			Action: *action, DocumentID: id, Body: bytes.NewReader(line), OnFailure: onFailure,
		}); err != nil {
			failed.Add(1)
		}
	}
	if err := bi.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bulkpeer: close:", err)
	}
	wall := time.Since(start).Seconds()
	cpu, maxrss := cpuSeconds()
	st := bi.Stats()
	out, _ := json.Marshal(map[string]any{
		"client": "opensearch-go v4.8.1 BulkIndexer", "documents": st.NumFlushed,
		"added": st.NumAdded, "failed": st.NumFailed + uint64(failed.Load()), "requests": st.NumRequests,
		"wall_seconds": wall, "cpu_seconds": cpu, "docs_per_second": float64(st.NumFlushed) / wall,
		"docs_per_cpu_second": float64(st.NumFlushed) / cpu, "peak_rss_kib": maxrss,
	})
	fmt.Println(string(out))
}
