// Package promtext reads samples from the Prometheus text format.
package promtext

import (
	"strconv"
	"strings"
)

// Sum adds up the samples of metric name whose labels include every pair in match.
func Sum(text, name string, match map[string]string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		labels, value := "", line[len(name):]
		if strings.HasPrefix(value, "{") {
			end := strings.LastIndex(value, "}")
			if end < 0 {
				continue
			}
			labels, value = value[1:end], value[end+1:]
		}
		if !matches(labels, match) {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) == 0 {
			continue
		}
		if f, err := strconv.ParseFloat(fields[0], 64); err == nil {
			sum += f
		}
	}
	return sum
}

func matches(labels string, match map[string]string) bool {
	for k, v := range match {
		if !strings.Contains(","+labels+",", ","+k+"=\""+v+"\",") {
			return false
		}
	}
	return true
}
