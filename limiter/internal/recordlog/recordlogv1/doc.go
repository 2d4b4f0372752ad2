// Package recordlogv1 is the record log's value format 1 as it was before
// exempt marks (commit 1a3f583, limiter/internal/recordlog), frozen: the
// codec and algorithm an older gateway runs. Only tests import it, to
// prove that gateways of both versions sharing one store count alike
// (see ../exempt.go). Never change it.
package recordlogv1
