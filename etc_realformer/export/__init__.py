"""SavedModel export (TF Serving layout). See README.md for serving notes."""
