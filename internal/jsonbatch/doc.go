// Package jsonbatch reads and rewrites the JSON bodies of multi-recipient
// push requests: Expo's message arrays, gorush notifications (tokens, to,
// topics and conditions, as Alternatives), OneSignal's
// include_subscription_ids, SendGrid personalizations, and the topics of
// an FCM HTTP v1 condition (FCMConditionTopics).
//
// A wildcard path such as notifications.*.tokens.* names the batch's
// recipient entries; Path.Enumerate lists them in body order, each with
// its concrete path, its wildcard indices, its byte span and its value
// rendered as the handler renders {json.<path>}. Batch.Resolve gives every
// entry the value of another dimension at that entry's indices.
// Batch.Remove deletes a set of entries from the body and SpliceExpo puts
// error tickets for them back into Expo's positional answer.
//
// What it guarantees:
//
//   - Documents are read in place, never decoded as a whole: the only
//     copies are the rendered values, whose total size is bounded by a
//     small multiple of the document's.
//   - Nothing recurses on the document's nesting: containers are skipped
//     by counting brackets, and recursion follows the path's wildcards,
//     at most MaxSegments deep. A document as deep as encoding/json
//     accepts (10,000 levels) costs no stack.
//   - Enumerate stops at the first entry past its maximum and returns
//     ErrTooMany, so a body of 100,000 recipients costs the scan of the
//     first max+1 of them, not a slice of 100,000.
//   - Remove keeps every byte outside the removed elements and the
//     separators that joined them to their neighbours; its result is
//     valid JSON whenever its input was.
//
// Every function expects a document that passed Valid (the rules of the
// handler's body parser: one JSON value, UTF-8, no object naming a member
// twice). On other input the results are unspecified, but nothing panics.
//
// Nothing here is safe for concurrent mutation; a Batch may be read by
// many goroutines once built.
package jsonbatch
