// Command bulkserver is an instant-answering bulk endpoint for client benchmarks: it reads each
// `_bulk` request, parses only the action lines, and answers every item as created, in
// OpenSearch's response format. `GET /` answers like an OpenSearch 2.19 node. It stores
// nothing, so its cost does not grow with the run, and it prints the number of documents it
// accepted when it gets SIGTERM or SIGINT.
//
//	bulkserver -listen 127.0.0.1:9290
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
)

var accepted atomic.Int64

type action map[string]struct {
	Index string `json:"_index"`
	ID    string `json:"_id"`
}

func bulk(w http.ResponseWriter, r *http.Request) {
	defaultIndex := ""
	if p := strings.TrimPrefix(r.URL.Path, "/"); strings.HasSuffix(p, "/_bulk") {
		defaultIndex = strings.TrimSuffix(p, "/_bulk")
	}
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 100<<20)
	var out bytes.Buffer
	out.WriteString(`{"took":1,"errors":false,"items":[`)
	items := 0
	expectSource := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if expectSource {
			expectSource = false
			continue
		}
		var a action
		if err := json.Unmarshal(line, &a); err != nil {
			http.Error(w, fmt.Sprintf(`{"error":"bad action line: %v","status":400}`, err), http.StatusBadRequest)
			return
		}
		for op, meta := range a {
			index := meta.Index
			if index == "" {
				index = defaultIndex
			}
			if items > 0 {
				out.WriteByte(',')
			}
			status, result := 201, "created"
			if op == "delete" {
				status, result = 200, "deleted"
			} else {
				expectSource = true
			}
			if op == "update" {
				status, result = 200, "updated"
			}
			fmt.Fprintf(&out, `{%q:{"_index":%q,"_id":%q,"_version":1,"result":%q,"_shards":{"total":1,"successful":1,"failed":0},"_seq_no":%d,"_primary_term":1,"status":%d}}`,
				op, index, meta.ID, result, items, status)
			items++
		}
	}
	if err := sc.Err(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out.WriteString(`]}`)
	accepted.Add(int64(items))
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write(out.Bytes())
}

func root(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.Error(w, `{"error":"not found","status":404}`, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write([]byte(`{"name":"bench","cluster_name":"bench","version":{"distribution":"opensearch","number":"2.19.6"},"tagline":"The OpenSearch Project: https://opensearch.org/"}`))
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9290", "address to listen on")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/_bulk") || r.URL.Path == "/_bulk" {
			bulk(w, r)
			return
		}
		root(w, r)
	})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		fmt.Printf("accepted %d\n", accepted.Load())
		os.Exit(0)
	}()
	log.Fatal(http.ListenAndServe(*listen, mux))
}
