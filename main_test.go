package main

import "testing"

// The SDK's logs are turned off only when no variable asks for logs.
func TestQuietSDK(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want map[string]string
	}{
		{env: map[string]string{}, want: map[string]string{"TF_LOG_SDK": "OFF"}},
		{env: map[string]string{"TF_LOG": ""}, want: map[string]string{"TF_LOG": "", "TF_LOG_SDK": "OFF"}},
		{env: map[string]string{"TF_LOG": "DEBUG"}, want: map[string]string{"TF_LOG": "DEBUG"}},
		{env: map[string]string{"TF_LOG_PROVIDER": "INFO"}, want: map[string]string{"TF_LOG_PROVIDER": "INFO"}},
		{env: map[string]string{"TF_LOG_SDK_FRAMEWORK": "TRACE"}, want: map[string]string{"TF_LOG_SDK_FRAMEWORK": "TRACE"}},
		{env: map[string]string{"TF_ACC_LOG_PATH": "/tmp/x"}, want: map[string]string{"TF_ACC_LOG_PATH": "/tmp/x"}},
	} {
		env := map[string]string{}
		for k, v := range c.env {
			env[k] = v
		}
		quietSDK(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, func(k, v string) error { env[k] = v; return nil })
		if len(env) != len(c.want) {
			t.Errorf("%v became %v, want %v", c.env, env, c.want)
			continue
		}
		for k, v := range c.want {
			if env[k] != v {
				t.Errorf("%v became %v, want %v", c.env, env, c.want)
			}
		}
	}
}
