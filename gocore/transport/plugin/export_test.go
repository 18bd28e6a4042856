package plugin

// KillForTest kills the plugin process of t.
func KillForTest(t *Transport) error {
	t.client.Kill()
	return nil
}
