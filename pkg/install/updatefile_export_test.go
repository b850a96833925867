package install

// ParseUpdateFile exposes LoadUpdateFile's parser to the external tests.
func ParseUpdateFile(data []byte) (*UpdateFile, error) { return parseUpdateFile(data) }

// Marshal exposes the bytes Save would write.
func (f *UpdateFile) Marshal() ([]byte, error) { return f.marshal() }
