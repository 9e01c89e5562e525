return { name = "spinner", version = "0.1.0" }
