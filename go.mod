module github.com/ration-dev/ration

go 1.26.0

require (
	golang.org/x/time v0.16.0
	gopkg.in/yaml.v3 v3.0.1
	pgregory.net/rapid v1.3.0
)
