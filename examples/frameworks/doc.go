// Package frameworks holds ration's adapters for Go web frameworks, in a
// module of their own so that ration's core module depends on none of
// them: chilimit (go-chi/chi), echolimit (labstack/echo) and ginlimit
// (gin-gonic/gin). Each puts client/httplimit in front of the
// framework's routes and labels every request with the framework's route
// pattern ("/v1/items/{id}", "/v1/items/:id"), which httplimit's default
// (http.Request.Pattern) only gets from net/http's ServeMux, so per-route
// costs, keys (httplimit.ByCallerAndRoute) and metrics work as they do
// there.
package frameworks
