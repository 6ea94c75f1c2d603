package inflight

import (
	"errors"
	"net/http"
	"strconv"
)

// HandlerConfig configures Handler.
type HandlerConfig struct {
	// Key names the request's key; an error answers 500 (through Reject).
	// It should come from something the caller cannot forge, such as the
	// authenticated principal (see httplimit.PrincipalFromContext).
	Key func(*http.Request) (string, error)
	// Reject writes the response when no slot is had (err is
	// ErrQueueFull, ErrWaitTimeout, the context's error, or Key's error).
	// The default answers 429 with Retry-After: 1 for ErrQueueFull and
	// ErrWaitTimeout, and 500 for a key error; a request whose context
	// ended gets 503 (its client has usually gone).
	Reject func(w http.ResponseWriter, r *http.Request, err error)
}

// errKey marks a HandlerConfig.Key error.
type errKey struct{ err error }

func (e errKey) Error() string { return "inflight: key: " + e.err.Error() }
func (e errKey) Unwrap() error { return e.err }

// Handler runs next holding one of the request's key's slots (Acquire with
// the request's context) and releases it when next returns or panics: the
// release is deferred, and a panic is recovered only to release first and
// then re-panicked with the same value, so net/http (or an outer recovery
// middleware) sees it unchanged, http.ErrAbortHandler included.
func Handler(l *Limiter, cfg HandlerConfig, next http.Handler) http.Handler {
	reject := cfg.Reject
	if reject == nil {
		reject = defaultReject
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := cfg.Key(r)
		if err != nil {
			reject(w, r, errKey{err})
			return
		}
		release, err := l.Acquire(r.Context(), key)
		if err != nil {
			reject(w, r, err)
			return
		}
		defer func() {
			release()
			if p := recover(); p != nil {
				panic(p)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

func defaultReject(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusServiceUnavailable
	var ke errKey
	switch {
	case errors.As(err, &ke):
		status = http.StatusInternalServerError
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrWaitTimeout):
		status = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.Itoa(1))
	}
	http.Error(w, http.StatusText(status), status)
}
