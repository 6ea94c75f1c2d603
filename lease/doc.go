// Package lease is ration's pure arithmetic.
package lease
