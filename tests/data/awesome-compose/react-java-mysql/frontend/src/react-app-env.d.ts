/// <reference types="react-scripts" />
