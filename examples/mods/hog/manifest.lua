return { name = "hog", version = "0.1.0" }
