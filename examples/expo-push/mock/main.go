// Command mock is a stand-in for Expo's push service (exp.host) for the
// expo-push example: it answers one ticket per recipient, in order (a
// "to" array's tokens one after another), reads bodies gzipped as the
// SDK sends them, and answers receipts for the tickets it gave, as
// exp.host does. It is the mock the conformance suite drives
// expo-server-sdk against. From the repository root:
//
//	go run ./examples/expo-push/mock          # listens on 127.0.0.1:9000
package main

import (
	"flag"
	"log"
	"net/http"

	"github.com/freqcap/caddy-freqcap/conformance"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9000", "the address to serve on")
	flag.Parse()
	log.Printf("mock Expo push service on http://%s (POST /--/api/v2/push/send, /--/api/v2/push/getReceipts)", *listen)
	log.Fatal(http.ListenAndServe(*listen, &conformance.Expo{}))
}
