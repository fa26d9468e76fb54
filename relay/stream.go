package relay

import "io"

// streamBody copies src to dst through buf. It flushes only when src had
// less than a buffer's worth ready: a large body streams in full buffers
// without a flush per write, while a trickling stream (NDJSON, a slow
// upstream) still reaches the client as each piece arrives. It reports the
// bytes written and which side failed; reaching src's EOF is no error.
func streamBody(dst io.Writer, flush func(), src io.Reader, buf []byte) (written int64, readErr, writeErr error) {
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			m, werr := dst.Write(buf[:n])
			written += int64(m)
			if werr != nil {
				return written, nil, werr
			}
			if n < len(buf) {
				flush()
			}
		}
		if rerr == io.EOF {
			return written, nil, nil
		}
		if rerr != nil {
			return written, rerr, nil
		}
	}
}
