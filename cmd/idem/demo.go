package main

import "github.com/spf13/cobra"

func newDemoCmd() *cobra.Command {
	return &cobra.Command{Use: "demo", Short: "Watch idem make a consumer exactly-once", Args: args(cobra.NoArgs),
		RunE: func(c *cobra.Command, _ []string) error { return usagef("demo: not implemented yet") }}
}
