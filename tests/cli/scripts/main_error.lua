error("main boom")
