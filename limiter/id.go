package limiter

// JoinIDs returns admission ids that refund, together, every admission of
// ids (the entries of one batch send): one Refund each instead of one an
// admission, so a batch's refund is one round trip per Redis node rather
// than one per entry. Ids of a Fallback's local decisions are joined apart
// from the others, so the result holds at most two ids. A joined id's
// Refund reports true when it gave back any of them.
func JoinIDs(ids []string) []string {
	var primary, local []byte
	for _, id := range ids {
		if len(id) > 0 && id[0] == localID {
			if local == nil {
				local = []byte{localID}
			}
			local = append(local, id[1:]...)
		} else {
			primary = append(primary, id...)
		}
	}
	var out []string
	if len(primary) > 0 {
		out = append(out, string(primary))
	}
	if len(local) > 1 {
		out = append(out, string(local))
	}
	return out
}
