package caddymodule

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// maxDroppedList bounds the Frequency-Cap-Dropped header in bytes. A
// batch drop may remove thousands of entries, and a header listing them
// all (about 30 bytes each) broke the sender's answer after the admitted
// entries were delivered: Node's HTTP clients refuse headers past 16 KiB
// (fetch: UND_ERR_HEADERS_OVERFLOW; node:http: HPE_HEADER_OVERFLOW), and a
// proxy in front may hold a whole answer head to 4 or 8 KiB (nginx's
// proxy_buffer_size).
const maxDroppedList = 4096

// setDropped sets the answer's Frequency-Cap-Dropped to the removed
// paths, in body order, as many as fit in maxDroppedList, and
// Frequency-Cap-Dropped-Count to how many were removed, so a sender can
// tell a list cut short.
func setDropped(h http.Header, dropped []string) {
	if len(dropped) == 0 {
		return
	}
	h.Set("Frequency-Cap-Dropped-Count", strconv.Itoa(len(dropped)))
	var list strings.Builder
	for _, p := range dropped {
		item, err := jsonbatch.SFStringList([]string{p})
		if err != nil {
			break // a path is field names and indices: not expected
		}
		sep := ""
		if list.Len() > 0 {
			sep = ", "
		}
		if list.Len()+len(sep)+len(item) > maxDroppedList {
			break
		}
		list.WriteString(sep)
		list.WriteString(item)
	}
	if list.Len() > 0 {
		h.Set("Frequency-Cap-Dropped", list.String())
	}
}
