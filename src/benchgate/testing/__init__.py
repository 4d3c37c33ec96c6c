"""Test helpers shipped with benchgate (a fake OpenAI-compatible server)."""
