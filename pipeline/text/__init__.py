"""Text shown, parsed and sent: literal printing, terminal tables, patches, paths, secrets, prompts."""
