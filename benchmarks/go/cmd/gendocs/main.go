// Command gendocs writes N deterministic NDJSON documents of about SIZE bytes each to stdout,
// so that every bulk client in a benchmark indexes exactly the same input.
//
//	gendocs -n 200000 -size 200 > docs.ndjson
//
// Each line is {"id":"d00000001","n":1,"msg":"<padding>"}; the id is unique per line.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	n := flag.Int("n", 100000, "number of documents")
	size := flag.Int("size", 200, "approximate bytes per document (the line, without the newline)")
	flag.Parse()
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer w.Flush()
	const alphabet = "abcdefghijklmnopqrstuvwxyz "
	for i := 1; i <= *n; i++ {
		head := fmt.Sprintf(`{"id":"d%08d","n":%d,"msg":"`, i, i)
		pad := *size - len(head) - 2
		if pad < 0 {
			pad = 0
		}
		var b strings.Builder
		b.Grow(pad)
		for j := 0; j < pad; j++ {
			b.WriteByte(alphabet[(i*7+j*13)%len(alphabet)])
		}
		fmt.Fprintf(w, "%s%s\"}\n", head, b.String())
	}
}
