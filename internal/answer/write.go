package answer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// writeJSON sends v as the whole answer, never cached.
func writeJSON(w http.ResponseWriter, status int, contentType string, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding answer: %w", err)
	}
	return writeBytes(w, status, contentType, append(out, '\n'))
}

func writeBytes(w http.ResponseWriter, status int, contentType string, out []byte) error {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, err := w.Write(out)
	return err
}
