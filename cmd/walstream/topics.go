package main

import (
	"fmt"
	"strings"

	"github.com/walstream/walstream/publish"
)

// topicCreation is --topic-creation: Kafka Connect topic.creation.*
// properties, name=value, one a line or separated by semicolons (values
// such as regex lists and cleanup.policy hold commas). It is parsed when
// set, so a bad value is a setting error from the flag, the environment or
// the config file alike.
type topicCreation struct {
	raw string
	tc  *publish.TopicCreation // nil: rely on broker auto-creation
}

func (t *topicCreation) String() string {
	if t == nil {
		return ""
	}
	return t.raw
}

func (t *topicCreation) Set(s string) error {
	props := make(map[string]string)
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ';' }) {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("%q is not name=value", line)
		}
		k = strings.TrimSpace(k)
		if _, dup := props[k]; dup {
			return fmt.Errorf("%s is set twice", k)
		}
		props[k] = strings.TrimSpace(v)
	}
	t.raw, t.tc = s, nil
	if len(props) == 0 {
		return nil
	}
	tc, err := publish.ParseTopicCreation(props)
	if err != nil {
		return err
	}
	t.tc = tc
	return nil
}

// creation is what publish.Config.TopicCreation takes.
func (t *topicCreation) creation() *publish.TopicCreation { return t.tc }
